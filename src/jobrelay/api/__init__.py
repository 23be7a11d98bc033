"""HTTP API: a thin FastAPI layer over the services built by `jobrelay.bootstrap`."""

from jobrelay.api.app import create_app

__all__ = ["create_app"]
