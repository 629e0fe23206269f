"""Independent reference implementations and random test inputs, one module per notebook stem, used by
the tests (and never by the judge): the judge compares with the model solution; these check the
solution itself."""
