"""One module per `surreal-kube` verb, named after it; `cli/main.py` registers each on the app.

A verb imports the CLI's helper modules (`spec_options`, `kube_view`, `image_options`,
`plan_view`, `output`, `local_view`), never another verb: what two verbs share is a helper.
"""
