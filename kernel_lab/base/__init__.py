"""What every layer shares: the lab's exception types, its dtype table and input maker (imports
nothing of the lab)."""
