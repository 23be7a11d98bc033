-- ccip.item: whether its source exists and is active (read in the completing transaction).
SELECT active FROM ccip_source WHERE id = %(source_id)s
