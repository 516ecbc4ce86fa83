"""Personal data and secrets: the scrubber and its detectors (identifiers, keyed values, phone numbers, secrets, value syntaxes)."""
