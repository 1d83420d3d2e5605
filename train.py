"""Training entry point: `accelerate launch train.py --config configs/train/<name>.yaml`.

A thin wrapper around `spanjudge train`, so the script and the CLI can never disagree.
"""

import sys

from spanjudge.inference.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
