"""``python -m tests.fuzz.fuzz_receive [libFuzzer flags] [CORPUS_DIR ...]``: fuzz the receive target."""

import sys

from tests.fuzz.run import main

if __name__ == "__main__":
    main("receive", sys.argv[1:])
