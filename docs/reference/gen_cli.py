"""Writes the command-line reference (reference/cli.md) at build time from the typer commands
themselves, with typer's own Markdown generator, so the page can never disagree with `--help`."""

from __future__ import annotations

import mkdocs_gen_files
import typer
from typer.cli import get_docs_for_click

from spanjudge.app.cli import app

command = typer.main.get_command(app)
with typer.Context(command) as context:
    reference = get_docs_for_click(obj=command, ctx=context, name="spanjudge", title="Command line")

with mkdocs_gen_files.open("reference/cli.md", "w") as page:
    page.write(
        reference.strip()
        + "\n\n*Generated from the command definitions when the site is built; `spanjudge COMMAND --help`"
        " prints the same.*\n"
    )
