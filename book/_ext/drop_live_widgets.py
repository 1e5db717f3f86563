"""Sphinx extension: the rendered book carries no frozen ipywidgets.

A live widget needs a kernel: in Jupyter or Colab the explorers (and tqdm's progress
bars) are widgets that respond, but in a static page their saved state would need
require.js and the ipywidgets HTML manager to show anything, and still nothing would
move. Each explorer has a static twin (capsedu/static.py) that moves without a kernel,
so the pages drop the widgets instead of shipping a renderer for them:

- every output that offers a widget view is removed whole, before myst-nb picks a mime
  type for it, so its ``text/plain`` stand-in ("VBox(...)", a bar frozen at 0%) does not
  take its place either;
- the widget state myst-nb saves per page, and the renderer scripts it would load with
  it (``nb_ipywidgets_js``, CDN addresses by default), are dropped for every notebook.

Listed in _config.yml (``sphinx.local_extensions`` puts this folder on sys.path).
"""
from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class DropWidgetViews(SphinxPostTransform):
    """Remove each output bundle that holds a widget view, whatever else it offers."""

    default_priority = 3  # before myst-nb's SelectMimeType (4) replaces the bundle

    def run(self, **kwargs):
        for bundle in list(self.document.findall(self._is_widget_bundle)):
            output = bundle.parent
            output.remove(bundle)
            if not output.children and output.get("nb_element") == "cell_code_output":
                output.parent.remove(output)  # an output area left empty goes too

    @staticmethod
    def _is_widget_bundle(node):
        return (isinstance(node, nodes.container) and node.get("nb_element") == "mime_bundle"
                and any(child.get("mime_type") == WIDGET_VIEW for child in node.children))


def drop_widget_scripts(app, env):
    """Forget the widget state and renderer scripts that myst-nb registered per notebook."""
    for data in getattr(env, "nb_metadata", {}).values():
        scripts = data.get("js_files", {})
        for key in [k for k in scripts if k.startswith("ipywidgets_")]:
            del scripts[key]
    return []


def setup(app):
    app.setup_extension("myst_nb")
    app.add_post_transform(DropWidgetViews)
    app.connect("env-updated", drop_widget_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
