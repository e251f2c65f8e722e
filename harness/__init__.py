"""The one way to start draftgate for tests, benches and drills.

``Deployment`` (deployment.py) composes a private deployment from its parts: a runtime on
its database, the API and the MCP server in threads of this process or as ``draftgate
serve`` processes, real Celery workers and beat as processes. What it is given decides the
rest: settings for the embedded kind (SQLite + kombu's SQLite broker) or for PostgreSQL +
Redis (settings.py), a gateway file or an OpenID issuer in those settings. ``DevRun``
(dev.py) runs ``draftgate dev`` itself as a user does.

Nothing in the product imports this package, and it imports no test code (import-linter
checks both): tests add their own reuse between tests on top (tests/support/stacks.py).
"""
