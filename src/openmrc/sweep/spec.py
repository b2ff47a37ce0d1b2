"""What a sweep is: the scenario, the swept axes, transports, seeds and metrics,
read from the command line and/or a sweep file, and expanded into points.

Every point is validated here, before anything runs: its overrides are
applied to the scenario data with the same machinery as ``openmrc run --set``
(:func:`openmrc.pipeline.run.apply_override`, :func:`~openmrc.pipeline.run.scenario_from_data`)
and the result goes through the scenario parser, so a wrong key or value is a
:class:`~openmrc.pipeline.run.UsageError` naming the key.  A point's fingerprint is
the SHA-256 of the canonical JSON of its resolved scenario values
(:func:`openmrc.pipeline.results.resolved`), its overrides, transport, seed and the
openmrc version.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..pipeline.run import (
    TRANSPORTS,
    UsageError,
    apply_override,
    parse_value,
    read_scenario_data,
    scenario_from_data,
)

#: Keys of a sweep file's top level and of its ``[sweep]`` table.
FILE_KEYS = ("scenario", "name", "description", "sweep")
SWEEP_KEYS = ("params", "set", "transports", "seeds", "metrics")

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+$")


# ----- values ----------------------------------------------------------------------
def split_values(text: str) -> list[str]:
    """Split a ``--param`` value list at the commas that are at the top level: not
    inside ``[...]``, ``{...}`` or a quoted string (``"..."`` with backslash
    escapes, ``'...'`` literal).  ``1,[2,3],"a,b"`` gives ``1``, ``[2,3]``, ``"a,b"``."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def toml_value(value: Any) -> str:
    """``value`` as TOML text that :func:`openmrc.pipeline.run.parse_value` reads back equal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are valid in TOML basic strings
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = k if _BARE_KEY.match(str(k)) else json.dumps(str(k))
            items.append(f"{key} = {toml_value(v)}")
        return "{" + ", ".join(items) + "}"
    raise UsageError(f"{value!r}: not a TOML value")


def display(value: Any) -> Any:
    """A value for the CSV and the plots: numbers, booleans and strings as they are,
    anything else as its TOML text."""
    if isinstance(value, bool | int | float | str):
        return value
    return toml_value(value)


# ----- axes ------------------------------------------------------------------------
@dataclass(frozen=True)
class Axis:
    """One swept dimension: its name (a key path, or a label), its values, and for
    each value the ``(key.path, value)`` pairs it sets in the scenario."""

    name: str
    values: tuple[Any, ...]
    settings: tuple[tuple[tuple[str, Any], ...], ...]
    #: where it came from, for error messages (``--param`` or ``sweep.params.X``)
    origin: str = "--param"

    def where(self) -> str:
        """The axis as its flag or key (``--param x.y`` or ``sweep.params.x``)."""
        return _where(self.name, self.origin)

    def assignments(self, i: int) -> list[str]:
        """The ``key.path=value`` overrides of value ``i``."""
        return [f"{path}={toml_value(v)}" for path, v in self.settings[i]]


def _where(name: str, origin: str) -> str:
    return f"--param {name}" if origin == "--param" else origin


def _check_values(name: str, values: list[Any], origin: str) -> None:
    if not values:
        raise UsageError(f"{_where(name, origin)}: no values")
    seen: list[Any] = []
    for v in values:
        if any(type(v) is type(s) and v == s for s in seen):
            raise UsageError(f"{_where(name, origin)}: the value {toml_value(v)} is given twice")
        seen.append(v)


def _check_path(path: str, origin: str) -> None:
    if path in ("seed", "transport.name"):
        raise UsageError(
            f"{origin} {path}: sweep seeds with --seeds / seeds, transports with --transports"
        )


def parse_param(text: str) -> Axis:
    """An axis from ``--param key.path=v1,v2,...`` (values: :func:`split_values`, each
    TOML or a bare word as a string, like ``--set``)."""
    path, sep, raw = text.partition("=")
    path = path.strip()
    if not sep or not path or not raw.strip():
        raise UsageError(f"--param {text}: expected key.path=value1,value2,...")
    _check_path(path, "--param")
    pieces = split_values(raw)
    if any(not p for p in pieces):
        raise UsageError(f"--param {path}: an empty value in {raw!r} (values are comma-separated)")
    values = [parse_value(p) for p in pieces]
    _check_values(path, values, "--param")
    return Axis(path, tuple(values), tuple(((path, v),) for v in values), "--param")


def _file_axis(name: str, value: Any, key: str) -> Axis:
    """An axis of a sweep file: ``"key.path" = [values]``, or a named axis
    ``name = {values = [...], set = [{"key.path" = value, ...}, ...]}``."""
    if isinstance(value, list):
        _check_path(name, key)
        _check_values(name, value, key)
        return Axis(name, tuple(value), tuple(((name, v),) for v in value), key)
    if isinstance(value, dict):
        extra = set(value) - {"values", "set"}
        if extra:
            raise UsageError(f"{key}.{sorted(extra)[0]}: unknown key (known: set, values)")
        values = value.get("values")
        sets = value.get("set")
        if not isinstance(values, list) or not values:
            raise UsageError(f"{key}.values: must be a non-empty list (the values plotted)")
        if not isinstance(sets, list) or len(sets) != len(values):
            raise UsageError(
                f"{key}.set: must be a list of {len(values)} tables, one per value "
                '({"key.path" = value, ...})'
            )
        _check_values(name, values, key)
        settings = []
        for i, table in enumerate(sets):
            if not isinstance(table, dict):
                raise UsageError(f"{key}.set[{i}]: must be a table of key.path = value")
            for path in table:
                _check_path(path, f"{key}.set[{i}]")
            settings.append(tuple(table.items()))
        return Axis(name, tuple(values), tuple(settings), key)
    raise UsageError(
        f"{key}: must be a list of values, or a table with values and set, got {value!r}"
    )


# ----- the sweep -------------------------------------------------------------------
@dataclass
class SweepSpec:
    """A sweep, before expansion: the scenario data and what varies over it."""

    name: str
    #: the scenario as given (a file, or ``SWEEPFILE#scenario`` when inline), for provenance
    scenario_file: str
    #: the scenario's parsed TOML/JSON, before any override
    data: dict[str, Any]
    #: the scenario's name in the results (its file's stem; the sweep's name when inline)
    scenario_name: str = ""
    #: where the scenario's relative file names (a .cm workload) are looked up
    base_dir: str | None = None
    #: ``key.path=value`` overrides of every point (``--set``, ``sweep.set``)
    fixed: list[str] = field(default_factory=list)
    axes: list[Axis] = field(default_factory=list)
    transports: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    #: metric names (openmrc.sweep.aggregate.METRICS or paths); empty: the defaults
    metrics: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """The sweep as JSON (for ``sweep.json``)."""
        return {
            "name": self.name,
            "scenario_file": self.scenario_file,
            "fixed": list(self.fixed),
            "axes": {
                a.name: {
                    "values": list(a.values),
                    "set": [[f"{p}={toml_value(v)}" for p, v in s] for s in a.settings],
                }
                for a in self.axes
            },
            "transports": list(self.transports),
            "seeds": list(self.seeds),
            "metrics": list(self.metrics),
        }


def _str_list(value: Any, key: str) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{key}: must be a non-empty list of names, got {value!r}")
    return value


def check_transports(names: list[str], key: str) -> list[str]:
    """``names`` if each is a known transport, once."""
    for name in names:
        if name not in TRANSPORTS:
            raise UsageError(f"{key}: {name!r} is not one of {', '.join(TRANSPORTS)}")
    if len(set(names)) != len(names):
        raise UsageError(f"{key}: names a transport twice")
    return names


def seeds_from(value: Any, key: str, first: int) -> list[int]:
    """Seeds from a count N (``first .. first + N - 1``) or an explicit list."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise UsageError(f"{key}: the number of seeds must be >= 1, got {value}")
        return list(range(first, first + value))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        if len(set(value)) != len(value):
            raise UsageError(f"{key}: a seed is given twice")
        return list(value)
    raise UsageError(f"{key}: a number of seeds (>= 1) or a list of seeds, got {value!r}")


def _scenario_seed(data: dict[str, Any]) -> int:
    seed = data.get("seed", 1)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 1


def load_spec(
    path: str,
    *,
    params: list[str] | None = None,
    sets: list[str] | None = None,
    transports: str | None = None,
    seeds: int | None = None,
    metrics: list[str] | None = None,
) -> SweepSpec:
    """The sweep of ``path`` (a sweep file, or a plain scenario file) with the
    command line's additions: ``--param`` adds an axis (or replaces the file's
    axis of that key), ``--set`` adds fixed overrides, ``--transports``,
    ``--seeds`` and ``--metric`` replace the file's."""
    data = read_scenario_data(path)
    p = Path(path)
    is_sweep = "sweep" in data or "scenario" in data
    file_axes: list[Axis] = []
    fixed: list[str] = []
    file_transports: list[str] | None = None
    file_seeds: Any = None
    file_metrics: list[str] = []
    name = p.stem
    if is_sweep:
        where = f"{path}: "
        try:
            for key in data:
                if key not in FILE_KEYS:
                    raise UsageError(
                        f"{key}: unknown key of a sweep file (known: {', '.join(FILE_KEYS)})"
                    )
            scenario = data.get("scenario")
            if isinstance(scenario, str):
                scenario_path = Path(scenario)
                if not scenario_path.is_absolute():
                    scenario_path = p.parent / scenario_path
                scenario_data = read_scenario_data(scenario_path)
                scenario_file = str(scenario_path)
                base_dir = scenario_path.resolve().parent
            elif isinstance(scenario, dict):
                scenario_data = scenario
                scenario_file = f"{path}#scenario"
                base_dir = p.resolve().parent
            else:
                raise UsageError(
                    "scenario: a scenario file name (relative to the sweep file) or a "
                    f"[scenario] table, got {scenario!r}"
                )
            if "name" in data:
                if not isinstance(data["name"], str) or not data["name"]:
                    raise UsageError(f"name: must be a non-empty string, got {data['name']!r}")
                name = data["name"]
            if "description" in data and not isinstance(data["description"], str):
                raise UsageError("description: must be a string")
            table = data.get("sweep", {})
            if not isinstance(table, dict):
                raise UsageError("sweep: must be a table")
            for key in table:
                if key not in SWEEP_KEYS:
                    raise UsageError(f"sweep.{key}: unknown key (known: {', '.join(SWEEP_KEYS)})")
            raw_params = table.get("params", {})
            if not isinstance(raw_params, dict):
                raise UsageError("sweep.params: must be a table of key.path = [values]")
            file_axes = [_file_axis(k, v, f"sweep.params.{k}") for k, v in raw_params.items()]
            raw_set = table.get("set", {})
            if not isinstance(raw_set, dict):
                raise UsageError('sweep.set: must be a table of "key.path" = value')
            for k, v in raw_set.items():
                _check_path(k, "sweep.set")
                fixed.append(f"{k}={toml_value(v)}")
            if "transports" in table:
                file_transports = check_transports(
                    _str_list(table["transports"], "sweep.transports"), "sweep.transports"
                )
            file_seeds = table.get("seeds")
            if file_seeds is not None:
                seeds_from(file_seeds, "sweep.seeds", 1)
            if "metrics" in table:
                file_metrics = _str_list(table["metrics"], "sweep.metrics")
        except UsageError as exc:
            raise UsageError(f"{where}{exc}") from None
        if not isinstance(scenario_data, dict):
            raise UsageError(f"{scenario_file}: the top level must be a table")
    else:
        scenario_data = data
        scenario_file = path
        base_dir = None
    axes = list(file_axes)
    for text in params or []:
        axis = parse_param(text)
        if any(a.name == axis.name for a in axes if a.origin == "--param"):
            raise UsageError(f"--param {axis.name}: given twice")
        axes = [a for a in axes if a.name != axis.name] + [axis]
    fixed.extend(sets or [])
    if transports is not None:
        chosen = check_transports(_str_list(transports, "--transports"), "--transports")
    elif file_transports is not None:
        chosen = file_transports
    else:
        t = scenario_data.get("transport", {})
        chosen = [t.get("name", "mrc") if isinstance(t, dict) else "mrc"]
    first = _scenario_seed(scenario_data)
    if seeds is not None:
        seed_list = seeds_from(seeds, "--seeds", first)
    elif file_seeds is not None:
        seed_list = seeds_from(file_seeds, "sweep.seeds", first)
    else:
        seed_list = [first]
    return SweepSpec(
        name=name,
        scenario_file=scenario_file,
        data=scenario_data,
        scenario_name=Path(scenario_file).stem if scenario_file != f"{path}#scenario" else name,
        base_dir=None if base_dir is None else str(base_dir),
        fixed=fixed,
        axes=axes,
        transports=chosen,
        seeds=seed_list,
        metrics=list(metrics) if metrics else file_metrics,
    )


# ----- points ----------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One run of a sweep: everything :func:`openmrc.sweep.runner.run_point` needs
    (picklable, independent of the local filesystem except the scenario's own
    relative files), and its fingerprint."""

    index: int
    #: axis name -> value
    params: dict[str, Any]
    transport: str
    seed: int
    #: ``key.path=value`` overrides: the fixed ones, then the axes'
    overrides: tuple[str, ...]
    fingerprint: str
    name: str
    scenario_file: str
    data: dict[str, Any]
    base_dir: str | None = None

    def label(self) -> str:
        """``key=value ..., transport T, seed S`` (for messages)."""
        parts = [f"{k}={toml_value(v)}" for k, v in self.params.items()]
        return ", ".join([*parts, f"transport {self.transport}", f"seed {self.seed}"])


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def fingerprint(
    resolved_values: dict[str, Any], overrides: list[str], transport: str, seed: int
) -> str:
    """SHA-256 (hex) of a point's inputs: resolved scenario values, overrides,
    transport, seed and the openmrc version."""
    from ..version import openmrc_version

    text = canonical_json(
        {
            "resolved": resolved_values,
            "overrides": list(overrides),
            "transport": transport,
            "seed": seed,
            "openmrc_version": openmrc_version(),
        }
    )
    return hashlib.sha256(text.encode()).hexdigest()


def build_points(spec: SweepSpec) -> list[Point]:
    """Every point of ``spec`` (axes x transports x seeds, in that order), each
    validated; the first bad one is a UsageError naming the key and the point."""
    from ..pipeline.results import resolved
    from ..pipeline.scenario import ScenarioError

    base_dir = None if spec.base_dir is None else Path(spec.base_dir)
    owner: dict[str, str] = {}
    for axis in spec.axes:
        for path in {path for setting in axis.settings for path, _ in setting}:
            if path in owner:
                raise UsageError(f"{axis.where()}: {path} is also swept by {owner[path]}")
            owner[path] = axis.where()
    # the paths themselves first, each with the flag it came from
    probe: dict[str, Any] = copy.deepcopy(spec.data)
    for assignment in spec.fixed:
        apply_override(probe, assignment, "--set")
    for axis in spec.axes:
        for i in range(len(axis.values)):
            trial = copy.deepcopy(probe)
            for assignment in axis.assignments(i):
                apply_override(trial, assignment, axis.origin)
    points: list[Point] = []
    combos = itertools.product(*(range(len(a.values)) for a in spec.axes))
    for combo in combos:
        overrides = list(spec.fixed)
        params: dict[str, Any] = {}
        for axis, i in zip(spec.axes, combo, strict=True):
            overrides.extend(axis.assignments(i))
            params[axis.name] = axis.values[i]
        for transport in spec.transports:
            for seed in spec.seeds:
                where = ", ".join(
                    [f"{k}={toml_value(v)}" for k, v in params.items()]
                    + [f"transport {transport}", f"seed {seed}"]
                )
                try:
                    scenario, workload = scenario_from_data(
                        spec.data,
                        overrides,
                        seed,
                        transport,
                        name=spec.scenario_name,
                        base_dir=base_dir,
                    )
                except (ScenarioError, UsageError) as exc:
                    message = " ".join(str(exc).split())
                    raise UsageError(f"{message} (in the point {where})") from None
                fp = fingerprint(resolved(scenario, workload), overrides, transport, seed)
                points.append(
                    Point(
                        index=len(points),
                        params=dict(params),
                        transport=transport,
                        seed=seed,
                        overrides=tuple(overrides),
                        fingerprint=fp,
                        name=spec.scenario_name,
                        scenario_file=spec.scenario_file,
                        data=spec.data,
                        base_dir=spec.base_dir,
                    )
                )
    return points
