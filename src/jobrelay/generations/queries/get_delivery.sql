SELECT body_sha256, status_code, response
FROM webhook_delivery
WHERE webhook_id = %(webhook_id)s
