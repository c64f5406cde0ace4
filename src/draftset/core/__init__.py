"""What every stage shares: the records that flow, reason codes, errors, counters, digests."""
