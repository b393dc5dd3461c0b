"""Generator backends behind one Protocol (``generation._base.Backend``)."""
