"""Claims under pressure (issue 27): a backlog, a pinned xmin horizon, readers, a burst, many
finished jobs. `claim_plan` explains one claim; `run` drives the timed scenarios."""
