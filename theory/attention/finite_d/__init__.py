"""The finite-d side of the attention model: data, gradient descent, GAMP."""
