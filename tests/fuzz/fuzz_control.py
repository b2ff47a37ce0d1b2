"""``python -m tests.fuzz.fuzz_control [libFuzzer flags] [CORPUS_DIR ...]``: fuzz the control target."""

import sys

from tests.fuzz.run import main

if __name__ == "__main__":
    main("control", sys.argv[1:])
