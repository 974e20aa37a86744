"""The histogram counting task: one attention layer that counts token occurrences."""
