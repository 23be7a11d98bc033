UPDATE webhook_delivery
SET status_code = %(status_code)s,
    response = %(response)s
WHERE webhook_id = %(webhook_id)s
