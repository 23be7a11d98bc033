"""Job-type groups that a deployment must refuse at startup (tests of `--app`)."""
