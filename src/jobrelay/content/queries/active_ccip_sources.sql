-- ccip.dispatch with allSources: every active source, in id order.
SELECT id FROM ccip_source WHERE active ORDER BY id
