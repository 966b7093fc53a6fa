// Ratchet dashboard: refreshes the parts of a page marked data-live="URL" every data-refresh
// milliseconds by fetching the URL's HTML fragment. No framework, no build step.
(function () {
  "use strict";
  function refresh(el) {
    var url = el.getAttribute("data-live");
    fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        el.innerHTML = html;
        el.setAttribute("data-updated", new Date().toISOString());
        document.body.classList.remove("stale");
      })
      .catch(function () { document.body.classList.add("stale"); });
  }
  document.querySelectorAll("[data-live]").forEach(function (el) {
    var every = parseInt(el.getAttribute("data-refresh"), 10) || 5000;
    setInterval(function () { if (!document.hidden) { refresh(el); } }, every);
  });
  // Buttons that ask before submitting (the server asks again for bulk actions).
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { ev.preventDefault(); }
    });
  });
})();
