// The lab pages: written with the lab framework (placeholder while it lands).
"use strict";
