"""Paper 2 (Arnaboldi, Loureiro, Stephan, Krzakala, Zdeborova): online SGD in sequence
single-index models."""
