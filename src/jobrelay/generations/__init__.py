"""Child job lifecycles (page_import, code2des, code2wf) and webhook outcomes (section 5)."""
