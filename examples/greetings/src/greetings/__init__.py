"""An example package of job types declared on jobrelay's public API."""
