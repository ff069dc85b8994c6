"""The runtimes a search runs on: CTranslate2 (the default where it can run the call) and
PyTorch (the paper's search, the reference for everything CTranslate2 cannot do, its
model made ready in its precision), behind one interface, and which one a call takes."""
