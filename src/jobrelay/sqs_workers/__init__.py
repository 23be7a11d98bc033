"""Reference external workers: read SQS, write S3, call the webhook; never touch PostgreSQL."""
