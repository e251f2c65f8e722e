"""Approvers' signing credentials: Ed25519 public keys and passkeys (WebAuthn), per
approver and tenant, and the enrolments of the ones approvers made themselves."""
