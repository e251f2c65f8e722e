"""The Celery front door: thin tasks that hand an execution id to the core."""
