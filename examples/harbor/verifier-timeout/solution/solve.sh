#!/bin/bash
printf '#!/bin/bash\necho done\n' > /app/run.sh
