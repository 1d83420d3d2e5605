"""Training entry point: `accelerate launch train.py --config configs/train/<name>.yaml`.

It runs the training stage's own command (`spanjudge train`'s) with the command line's handling
of mistakes and signals, so the script and the CLI can never disagree.
"""

import sys

from spanjudge.app.cli import run
from spanjudge.training.cli import train

if __name__ == "__main__":
    sys.exit(run(train, sys.argv[1:], prog_name="train.py"))
