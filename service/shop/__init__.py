"""The bundled reference domain: a small shop standing in for a downstream business system."""
