"""The general model: any sequence length L, student rank r, teacher rank r_t."""
