-- For the rest of this transaction: no statement runs longer than %(ms)s milliseconds.
SELECT set_config('statement_timeout', %(ms)s, true)
