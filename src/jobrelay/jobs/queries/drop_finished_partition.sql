SELECT jobrelay_drop_finished_partition_v1(%(name)s) AS jobs
