"""Does distillation work? GPT-4's quintd-1 error spans teach a small student on a 2-core CPU.

    .venv/bin/python bench/distill_quintd.py --label NAME [--recipe R] [--train-seed N] [--split test] [...]
    .venv/bin/python bench/distill_quintd.py --recompute [--only LABEL ...]   # no model: the tables again

The study is the command `spanjudge distill` (`spanjudge.eval.distill`: its settings, phases, report); this is
that command under the protocol's old name, with the same options (`spanjudge distill --help`). A list option is
repeated: `--domains wikidata --domains owid`. bench/distill_protocol.sh runs the protocol's runs in order.
Results: bench/results/distill_quintd.{json,md}, each judge's judgments in bench/results/distill_judgments/.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from spanjudge.app.cli import run
from spanjudge.eval.distill.cli import distill


def main() -> int:
    os.chdir(Path(__file__).resolve().parents[1])  # the protocol's results and work folders are the checkout's
    return run(distill, sys.argv[1:], prog_name="bench/distill_quintd.py")


if __name__ == "__main__":
    sys.exit(main())
