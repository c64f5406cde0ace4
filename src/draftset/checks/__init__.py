"""`draftset verify`: the checks that prove a built set is what its manifest says."""
