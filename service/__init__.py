"""draftgate core: every rule lives here; the front doors only translate."""
