SELECT
    current_setting('server_version') AS server_version,
    current_database() AS database
