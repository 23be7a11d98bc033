SELECT current_setting('data_directory', true) AS data_directory,
       inet_server_addr() IS NULL AS via_socket
