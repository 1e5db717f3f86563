/* capsedu.js, on every page of the book (_config.yml's html_js_files), no library:

   - capseduState: the state of the kernel-free controls (the static twins, chapter 6's panel
     and vote explorer) in the URL's fragment, #key=value&key=value, so that a copied URL
     shows the same view. Written with history.replaceState: no reload, no history entry.
     A heading's anchor in the fragment gives way to the state once a control moves.
   - Predict, then see: a question (an admonition of class capsedu-predict) whose list items
     become choices; the answer after it (a dropdown of class capsedu-answer) stays hidden
     until one is chosen. Without JavaScript, as in Colab, the answer is a plain dropdown. */
(function () {
  "use strict";
  function read() {
    var state = {};
    location.hash.slice(1).split("&").forEach(function (part) {
      var at = part.indexOf("=");
      if (at > 0) { state[decodeURIComponent(part.slice(0, at))] = decodeURIComponent(part.slice(at + 1)); }
    });
    return state;
  }
  window.capseduState = {
    get: function (key) { return read()[key]; },          // undefined when the URL holds none
    set: function (key, value) {
      var state = read();
      state[key] = value;
      history.replaceState(history.state, "", "#" + Object.keys(state).map(function (k) {
        return encodeURIComponent(k) + "=" + encodeURIComponent(state[k]);
      }).join("&"));
    }
  };

  function predict(question) {
    var answer = question.nextElementSibling, items = question.querySelectorAll("li");
    if (!answer || !answer.classList.contains("capsedu-answer") || !items.length) { return; }
    answer.hidden = true;
    Array.prototype.forEach.call(items, function (li) {
      var choice = document.createElement("button");
      choice.type = "button";
      choice.className = "capsedu-choice";
      while (li.firstChild) { choice.appendChild(li.firstChild); }
      li.appendChild(choice);
      choice.addEventListener("click", function () {
        question.querySelectorAll(".capsedu-choice").forEach(function (b) { b.disabled = true; });
        choice.classList.add("capsedu-chosen");
        answer.hidden = false;
        if (answer.classList.contains("toggle-hidden")) {               // sphinx-togglebutton's fold
          answer.querySelector(".admonition-title").click();
        }
      });
    });
  }
  function start() { document.querySelectorAll(".capsedu-predict").forEach(predict); }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
