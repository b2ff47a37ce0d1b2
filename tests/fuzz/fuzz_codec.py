"""``python -m tests.fuzz.fuzz_codec [libFuzzer flags] [CORPUS_DIR ...]``: fuzz the codec target."""

import sys

from tests.fuzz.run import main

if __name__ == "__main__":
    main("codec", sys.argv[1:])
