"""Studies: graph variants, each repeated on shared seeds, ranked on one exact objective."""
