/* MathJax 2 `MathJax.Hub` shim over MathJax 3, for @jupyter-widgets/html-manager.
 *
 * The widget renderer (html-manager 1.0.6, controls 2.0.0) typesets widget labels with
 * MathJax 2's API: `MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])`. The book serves
 * MathJax 3 (book/_vendor/mathjax), which has no `Hub`, so every label threw
 * "Cannot read properties of undefined (reading 'Queue')". This file gives MathJax 3 the
 * small part of `Hub` that callers use, in terms of `MathJax.typesetPromise`, queued on
 * `MathJax.startup.promise` as MathJax 3's documentation recommends.
 *
 * Listed in _config.yml (nb_ipywidgets_js, before the widget scripts); served from _static/.
 * Order-proof: it installs itself now if MathJax 3 has already run, else at DOMContentLoaded,
 * which follows every deferred script (MathJax included) and precedes the window "load" event
 * on which html-manager renders the widgets. It does nothing under MathJax 2 or without MathJax.
 */
(function () {
  "use strict";

  function element(node) {
    return typeof node === "string" ? document.getElementById(node) : node;
  }

  function install() {
    var mj = window.MathJax;
    if (!mj || mj.Hub || typeof mj.typesetPromise !== "function" || !mj.startup) {
      return; // no MathJax, MathJax 2 (has its own Hub), or MathJax 3 not loaded yet
    }
    var inQueue = false; // true while a queued step runs: Hub calls made by it run at once
    // Run `step` after MathJax's start-up and after every earlier queued step.
    function enqueue(step) {
      mj.startup.promise = mj.startup.promise.then(function () {
        inQueue = true;
        try { return step(); } finally { inQueue = false; }
      }).catch(function (err) {
        console.error("MathJax.Hub shim:", err);
      });
      return mj.startup.promise;
    }
    var Hub = {
      // MathJax 2: Typeset(element or its id, callback); no element: the whole page.
      Typeset: function (node, callback) {
        function typeset() {
          var el = element(node);
          return mj.typesetPromise(el ? [el] : undefined).then(function () {
            if (typeof callback === "function") { callback(); }
          });
        }
        return inQueue ? typeset() : enqueue(typeset);
      },
      // MathJax 2 callback specifications: a function, [function, args...] or
      // ["method", object, args...]; run in order, each after the previous one finished.
      Queue: function () {
        var result;
        Array.prototype.forEach.call(arguments, function (spec) {
          result = enqueue(function () {
            if (typeof spec === "function") { return spec(); }
            if (Array.isArray(spec) && typeof spec[0] === "function") {
              return spec[0].apply(null, spec.slice(1));
            }
            if (Array.isArray(spec) && typeof spec[0] === "string" && spec[1]
                && typeof spec[1][spec[0]] === "function") {
              return spec[1][spec[0]].apply(spec[1], spec.slice(2));
            }
          });
        });
        return result;
      },
    };
    mj.Hub = Hub;
  }

  install();
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", install);
  }
})();
