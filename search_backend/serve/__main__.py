"""`python -m search_backend.serve`: the retrieval server (`searchrl search serve`)."""

from search_backend.serve.app import main

if __name__ == "__main__":
    main()
