(function () {
  var root = document.getElementById($id);
  if (!root) { return; }
  var frames = JSON.parse(root.querySelector("script.capsedu-twin-frames").textContent);
  var img = root.querySelector("img.capsedu-twin-frame");
  var inputs = root.querySelectorAll("[data-control]");
  var url = window.capseduState, saved = url && url.get(root.id);   // the book's pages only
  if (saved && frames[saved]) { saved.split("-").forEach(function (v, n) { inputs[n].value = v; }); }
  function show(ev) {
    var key = [];
    for (var n = 0; n < inputs.length; n++) {
      var el = inputs[n];
      key.push(el.value);
      var out = root.querySelector('output[data-for="' + el.getAttribute("data-control") + '"]');
      if (out) { out.textContent = JSON.parse(el.getAttribute("data-labels"))[Number(el.value)]; }
    }
    key = key.join("-");
    if (frames[key]) { img.src = "data:image/png;base64," + frames[key]; img.setAttribute("data-key", key); }
    if (ev && url) { url.set(root.id, key); }
  }
  for (var n = 0; n < inputs.length; n++) {
    inputs[n].addEventListener("input", show);
    inputs[n].addEventListener("change", show);
  }
  root.querySelector(".capsedu-twin-controls").hidden = false;
  show();
})();
