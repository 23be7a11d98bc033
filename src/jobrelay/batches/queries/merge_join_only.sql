-- For the rest of this transaction: plan joins as merge joins over index order, serially.
SELECT set_config('enable_hashjoin', 'off', true),
       set_config('max_parallel_workers_per_gather', '0', true)
