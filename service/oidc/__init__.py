"""OAuth resource-server mode: JWT access tokens from an external OpenID provider.

Beside draftgate's opaque tokens, both HTTP doors accept access tokens an OpenID provider
issued for them (RFC 9068 style JWTs): the provider is discovered from its issuer URL, its
signing keys are fetched and cached (refetched when a token names a key not yet seen), and
the token's claims become a draftgate ``Principal``. See docs/authorization.md.
"""
