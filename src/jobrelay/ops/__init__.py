"""Operations: pause, duplicate reconciliation, the SET LOGGED runbook and its report."""
