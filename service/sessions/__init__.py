"""Console sessions: signing in to the approvers' console, and what a signed-in person reads."""
