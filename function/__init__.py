"""A Crossplane composition function: one isolated Linux sandbox per workspace on Cozystack."""
