"""Work-directory file formats: one module per JSON file, each owning its writer, reader and validator.

``performance_json`` (step 4, the collector), ``peak_json`` (step 5, with the per-device cache),
``flops_check_json`` (step 3), ``verify_json`` (verify, between steps 1 and 2), ``decompose_json`` (step 6); a module per new file
(``probe.json``, ``grid_search.json``) goes here too. Every other module reads these files only through them.
``common`` holds the error every validator raises for a field of the wrong type.
"""
