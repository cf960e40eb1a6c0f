"""The gallery's inline CSS and JavaScript (inline so that the pages need no network and no second file).

The script only shows and hides elements by their `data-*` attributes; it never builds HTML from data, so
nothing a model wrote can reach it as code.
"""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2330;background:#f6f7f9;margin:0}
main{max-width:1280px;margin:0 auto;padding:20px 24px}
h1{font-size:21px;margin:0 0 6px}h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #dde1e7}
h3{font-size:15px;margin:14px 0 6px}
.muted,.note{color:#5b6472;font-size:13px}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #dde1e7;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.ci{color:#5b6472;font-size:12px}.sig{font-weight:700}
.off{display:none!important}
.filters{position:sticky;top:0;background:#f6f7f9;padding:8px 0;border-bottom:1px solid #dde1e7;z-index:1}
.filters label{margin-right:14px}select{font:inherit}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:700;font-size:12px;color:#fff}
.badge.SUPPORTED{background:#2e7d32}.badge.REFUTED{background:#c62828}.badge.NEI{background:#8d6e00}
.badge.none{background:#555}
td.verdict.right{background:#eaf6ea}td.verdict.wrong{background:#fbeaea}td.verdict.missing{color:#9aa1ab}
.mark{font-weight:700;margin-left:4px}.right .mark{color:#2e7d32}.wrong .mark{color:#c62828}
.plots{display:flex;flex-wrap:wrap;gap:16px}.plot{background:#fff;border:1px solid #dde1e7;padding:8px;margin:0}
.claim{font-size:16px;background:#fff;border-left:4px solid #4a6fa5;padding:10px 14px;margin:8px 0 14px}
iframe.report{width:100%;height:640px;border:1px solid #dde1e7;background:#fff;resize:vertical}
pre.final{white-space:pre-wrap;background:#fff;border:1px solid #dde1e7;padding:8px;max-height:420px;overflow:auto}
"""

# The index page's filters: dataset / system / gold label / right-wrong. A claim row stays visible for
# "right" when every shown system is right, for "wrong" when any shown system is wrong.
FILTER_JS = """
(function () {
  var ids = ["f-dataset", "f-system", "f-gold", "f-outcome"];
  function val(id) { return document.getElementById(id).value; }
  function apply() {
    var d = val("f-dataset"), s = val("f-system"), g = val("f-gold"), o = val("f-outcome");
    document.querySelectorAll("[data-filter]").forEach(function (el) {
      var ok = (!d || !el.dataset.dataset || el.dataset.dataset === d) &&
               (!s || !el.dataset.system || el.dataset.system === s);
      el.classList.toggle("off", !ok);
    });
    var shown = 0, rows = document.querySelectorAll("tr.claim-row");
    rows.forEach(function (tr) {
      var ok = (!d || tr.dataset.dataset === d) && (!g || tr.dataset.gold === g);
      if (ok && o) {
        var outcomes = [];
        tr.querySelectorAll("td.verdict").forEach(function (td) {
          if ((!s || td.dataset.system === s) && td.dataset.outcome !== "missing") outcomes.push(td.dataset.outcome);
        });
        ok = o === "right" ? outcomes.length > 0 && outcomes.every(function (x) { return x === "right"; })
                           : outcomes.indexOf("wrong") >= 0;
      }
      tr.classList.toggle("off", !ok);
      if (ok) shown += 1;
    });
    document.getElementById("claim-count").textContent = shown + " of " + rows.length + " claims shown";
  }
  ids.forEach(function (id) { document.getElementById(id).addEventListener("change", apply); });
  apply();
})();
"""

# Claim pages: grow each report frame to its content. The frames are sandboxed without scripts; reading
# their height needs same-origin access, and where the browser refuses it the frame keeps its CSS height.
RESIZE_JS = """
(function () {
  function fit(f) {
    try {
      var doc = f.contentDocument;
      if (doc && doc.documentElement) f.style.height = (doc.documentElement.scrollHeight + 24) + "px";
    } catch (e) { /* cross-origin: keep the default height */ }
  }
  document.querySelectorAll("iframe.report").forEach(function (f) {
    f.addEventListener("load", function () { fit(f); });
    fit(f);
  });
})();
"""
