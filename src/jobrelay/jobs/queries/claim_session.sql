-- Session settings of a worker's claim connection, which runs nothing but claims.
--
-- synchronous_commit off: a claim commits without waiting for the WAL flush. If the server
-- crashes before the flush, recovery undoes the claim, the job is pending again, and the
-- worker's later CAS writes fail as a lost lease. No job is lost, and completions (recorded
-- on other connections) keep synchronous commit.
--
-- plan_cache_mode force_generic_plan: the prepared claim statement is planned once per
-- connection. With its array parameters the planner otherwise keeps choosing a custom plan,
-- and planning costs more than running the statement.
SELECT
    set_config('synchronous_commit', 'off', false),
    set_config('plan_cache_mode', 'force_generic_plan', false)
