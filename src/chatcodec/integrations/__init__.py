"""chatcodec inside other serving engines. Nothing here is imported by ``import chatcodec``:
each module needs its engine installed (``pip install 'chatcodec[vllm]'``)."""
