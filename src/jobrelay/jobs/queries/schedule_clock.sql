-- The database's time, from which a new schedule's first tick is computed.
SELECT clock_timestamp() AS now
