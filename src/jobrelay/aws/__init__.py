"""AWS adapters: SQS and S3 clients (aiobotocore) and the local emulator (moto server)."""
