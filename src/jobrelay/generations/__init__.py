"""Generations (docs/explanation/code2wf.md): the Code2WF service (creation rules, dispatch
job, discovery, placement) and the receiver of signed worker webhooks. The child rows
themselves, and every write to them, are `jobrelay.children`."""
