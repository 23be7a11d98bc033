"""The results bucket: write-once objects under immutable keys.

`put_once` writes with `If-None-Match: *`, so the first writer of a key wins and every
later writer (a redelivery, a duplicate message, a slower twin worker) gets the bytes that
are already there. Combined with outcomes derived from the stored bytes, every delivery
of one child and attempt reports the same result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from jobrelay.sqs_workers.errors import TransientFailure

if TYPE_CHECKING:  # the published stubs are a dev dependency: annotations only
    from types_aiobotocore_s3 import S3Client

_EXISTS = {"PreconditionFailed", "ConditionalRequestConflict", "412"}
_MISSING = {"NoSuchKey", "404", "NotFound"}


class ResultStore:
    def __init__(self, s3: S3Client, bucket: str) -> None:
        self._s3 = s3
        self.bucket = bucket

    async def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no object at `key`."""
        try:
            response = await self._s3.get_object(Bucket=self.bucket, Key=key)
            async with response["Body"] as stream:
                body: bytes = await stream.read()
                return body
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return None
            raise TransientFailure(f"S3 get of {key} failed: {_code(exc)}") from exc
        except BotoCoreError as exc:
            raise TransientFailure(f"S3 get of {key} failed: {type(exc).__name__}") from exc

    async def put_once(self, key: str, body: bytes, content_type: str) -> bytes:
        """Store `body` at `key` unless an object is there; return the bytes at `key`."""
        try:
            await self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ContentType=content_type,
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if _code(exc) not in _EXISTS:
                raise TransientFailure(f"S3 put of {key} failed: {_code(exc)}") from exc
            existing = await self.get(key)
            if existing is None:
                raise TransientFailure(f"S3 object {key} vanished after a conflict") from exc
            return existing
        except BotoCoreError as exc:
            raise TransientFailure(f"S3 put of {key} failed: {type(exc).__name__}") from exc
        return body


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "unknown"))
