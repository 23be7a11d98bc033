"""The `jobrelay` command line (Typer): one module per area under `commands/`."""
